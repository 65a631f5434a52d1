"""The app the HTTP API tests serve: the test agents (`tests.apps`), the definition tools and classifiers, and
a code workflow."""

from __future__ import annotations

from keel.app import App
from tests.apps import app as test_app
from tests.workflows_json.code_workflows import Release

app = App(
    agents=dict(test_app.agents),
    tools=dict(test_app.tools),
    classifiers=dict(test_app.classifiers),
    workflows=(Release,),
)
