"""Views of `rldbg top`; each owns its bindings and renders a View it is handed."""
