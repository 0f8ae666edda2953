"""elastic package."""
