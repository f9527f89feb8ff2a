"""attnkit: softmax attention forward. Importing it loads the extension, which registers the
operators under torch.ops.attnkit."""

import torch

from . import _attnkit_C  # noqa: F401  (registers torch.ops.attnkit)

fwd = torch.ops.attnkit.fwd
attention = torch.ops.attnkit.attention
