"""Whether a new job may be submitted: the one set of rules the create page and the API use.

`policy.admission.rules` is plain (a job's fields and the facts it needs in, problems out:
field → messages); `jobs.admission.facts` loads those facts from the database in a constant
number of queries and turns a valid request into a `JobSpec` for `jobs.actions.submit`.
"""
