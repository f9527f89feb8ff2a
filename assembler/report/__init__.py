"""Output for people (rich tables) and for machines (JSON); commands pick one."""
