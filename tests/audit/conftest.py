from tests.web.conftest import _fast_passwords, api, job, member_client  # noqa: F401 (fixtures)
