"""Helping write a Stable-ABI migration: the inventory of LibTorch uses (`assemble assess`) and
the token review of a migration series (`assemble review`). The rules are data,
``assembler/data/migration_rules.json``."""
