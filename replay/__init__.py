"""``python -m replay``: re-drive selected dead letters to the topic they came from, exactly once."""
