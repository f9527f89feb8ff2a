"""Following a moving upstream: patch status detection, rebase with a journal, horizon."""
