"""The audit log: who did what to which object, when, from where (console only).

Entries come from three places: the jobs core's notices (`jobs.hooks`: submit, stop,
restart, terminate, by a person), the admin site's own change history (quota edits, node
cordon/drain/token actions, agent and API tokens: mirrored at the end of each admin POST),
and direct calls from the shell and the API (API tokens created or revoked on the token
page, denied access, failed sign-ins). The source address comes from the request being
served (`audit.context`, set by `audit.middleware`).
"""
