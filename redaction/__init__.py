"""Redaction rules and the fail-closed redaction stage (Presidio). Built in issue 5.

Until then the validate stage refuses to quote input values in any dead-letter reason, so no
raw field content reaches storage through the error path.
"""
