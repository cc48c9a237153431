"""Who calls the console: researchers' API tokens and bearer authentication."""
