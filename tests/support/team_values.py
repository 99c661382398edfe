"""A dev values file with comments and one team, for the `trainstack team add` tests (unit and chart):
what the command must keep byte for byte when it refuses."""

from __future__ import annotations

import pytest

VALUES = """\
# dev values: a comment that must survive.
policies:
  # Guard rails warn here.
  validationActions: [Warn, Audit]   # trailing comment

teams:
  # the first team
  existing:
    members:
      - {kind: Group, name: existing, role: edit}
"""


@pytest.fixture
def values_file(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(VALUES)
    return path
