"""The language's exceptions: one type per kind of input, so callers can answer the right party."""


class QelError(ValueError):
    """Base of every error the language raises about its input."""


class QueryError(QelError):
    """A subscription outside the language; the message names the construct and where it is."""


class PublicationError(QelError):
    """An RDF document that cannot be read as publications (syntax, blank-node subject, limits)."""


class AdvertisementError(QelError):
    """An advertisement that does not follow the documented shape."""


class SchemaError(QelError):
    """An RDF document that cannot be read as a schema (syntax, statements that are not RDFS
    axioms, axioms about RDF's own vocabulary, limits)."""
