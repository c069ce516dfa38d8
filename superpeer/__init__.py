"""superpeer."""
