"""``elastic.driver.leading.still_leads``: the driver acts on the workers only while the time
its launcher's fence wrote (``ELASTIC_LEADER_VALID_UNTIL``) is ahead of the monotonic clock;
no variable (no election): it leads; a file it cannot read: it does not."""
from elastic.driver.leading import still_leads


def test_without_an_election_the_launcher_leads():
    assert still_leads({}, clock=lambda: 1e12)


def test_it_leads_until_the_time_the_fence_wrote(tmp_path):
    path = tmp_path / "leader-valid-until"
    path.write_text("1000.5\n")
    env = {"ELASTIC_LEADER_VALID_UNTIL": str(path)}
    assert still_leads(env, clock=lambda: 1000.0)
    assert not still_leads(env, clock=lambda: 1000.5)  # a leader woken from a pause past it
    assert not still_leads(env, clock=lambda: 2000.0)


def test_a_missing_or_garbled_file_is_not_leading(tmp_path):
    assert not still_leads({"ELASTIC_LEADER_VALID_UNTIL": str(tmp_path / "gone")}, clock=lambda: 0.0)
    (tmp_path / "bad").write_text("soon")
    assert not still_leads({"ELASTIC_LEADER_VALID_UNTIL": str(tmp_path / "bad")}, clock=lambda: 0.0)
