"""The one exception type for mistakes a user can fix: the CLI prints it as one line."""


class AttnmtError(Exception):
    """A user error (bad file, bad config, bad model file); the message says what and where."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none), for a one-line error."""
    return (str(err).splitlines() or [type(err).__name__])[0]
