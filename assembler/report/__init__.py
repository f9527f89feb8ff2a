"""Output for people (report.table for every command's tables, rich for progress and markup lines)
and for machines (JSON: report.output); commands pick one."""
