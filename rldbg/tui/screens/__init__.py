"""Modal screens of `rldbg top`: help and one-line prompts."""
