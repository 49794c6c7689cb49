"""The one exception type for mistakes a user can fix: the CLI prints it as one line."""


class AttnmtError(Exception):
    """A user error (bad file, bad config, bad model file); the message says what and where."""
