"""Text columns that always fit (protocol.text, docs/agent-protocol.md): whatever path writes them
(a save, a queryset update, a bulk insert), the value is cleaned on its way to the database, so no
NUL or lone surrogate reaches PostgreSQL and no reason outgrows its column.

They are a safety net under the checks at each boundary (the form refuses, the agent
protocol repairs with a reason); lookups are cleaned the same way, so they still match.
"""

from django.db import models

from protocol.text import clean_text, fit


class FittedCharField(models.CharField):
    """A CharField for machine-written text (reasons): cleaned and cut to max_length with
    "…" where it was cut."""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if isinstance(value, str) and self.max_length is not None:
            return fit(value, self.max_length)
        return value


class CleanTextField(models.TextField):
    """A TextField whose text is cleaned (NUL → ␀, lone surrogates → U+FFFD)."""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return clean_text(value) if isinstance(value, str) else value
