"""Integrations: other frameworks' dispatch layers driving rldbg's seam (rldbg/instrument.py)."""
