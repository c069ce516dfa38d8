"""peer."""
