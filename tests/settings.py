"""Settings of the test suite: the development profile, stated explicitly.

The platform's default is production (DEBUG off, secure cookies, SSL redirect,
strong secrets required); tests run the development profile on plain HTTP like
``make run``, whatever the shell or ``.env`` says. Subprocesses started by tests
inherit this environment. Tests of the production profile start a subprocess with
their own environment and ``DJANGO_SETTINGS_MODULE=rcp_platform.settings``.
"""

import os

os.environ["DEBUG"] = "true"

from rcp_platform.settings import *  # noqa: E402,F403
