"""The language server (built in a later step; see issue 4)."""
