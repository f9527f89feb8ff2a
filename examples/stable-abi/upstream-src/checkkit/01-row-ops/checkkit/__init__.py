"""checkkit: row scaling and a total. Importing it loads the extension, which registers the
operators under torch.ops.checkkit."""

import torch

from . import _checkkit_C  # noqa: F401  (registers torch.ops.checkkit)

row_scale = torch.ops.checkkit.row_scale
total = torch.ops.checkkit.total
