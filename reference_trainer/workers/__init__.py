"""Roles: the hybrid actor/rollout/reference worker, the critic and the reward."""
