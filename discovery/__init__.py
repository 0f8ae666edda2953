"""discovery package."""
