"""analytics."""
