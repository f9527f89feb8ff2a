"""`assemble check`: a source-level Stable-ABI proof, one preprocessor pass per translation
unit with the build's defines and include paths, no compiling (see run.py), and the evidence
it leaves for `assemble patches` (evidence.py)."""
