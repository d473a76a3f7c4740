"""The docs: every example runs, and the site builds strictly."""
