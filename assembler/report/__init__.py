"""Output for people (report.table for the everyday commands' tables, rich for progress and the long commands' tables) and for machines (JSON: report.output); commands pick one."""
