"""Git operations: bare mirrors in the cache, fork checkouts with the series applied, export."""
