"""poset."""
