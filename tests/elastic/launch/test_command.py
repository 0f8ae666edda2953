"""The horovodrun command elastic-run builds: the flags that make an elastic job work, and
one-line errors for values horovodrun would reject later (or silently misuse)."""
import pytest

from elastic.errors import ConfigError
from elastic.launch.command import HorovodrunOptions, build_horovodrun_command

SCRIPT = "/venv/bin/discover-hosts"
TRAIN = ["python", "-m", "training.mnist", "--epochs", "1"]


def flag_values(argv, flag, n=1):
    i = argv.index(flag)
    return argv[i + 1:i + 1 + n]


def test_minimal_command_is_elastic_with_discovery_and_a_cooldown():
    argv = build_horovodrun_command(HorovodrunOptions(discovery_script=SCRIPT, min_np=2), TRAIN)
    assert argv[0] == "horovodrun"
    assert flag_values(argv, "--host-discovery-script") == [SCRIPT]
    assert flag_values(argv, "--min-np") == ["2"]
    assert flag_values(argv, "-np") == ["2"]
    assert flag_values(argv, "--elastic-timeout") == ["600"]
    # a host that failed once is retried after a cooldown, not shut out for the job
    assert flag_values(argv, "--blacklist-cooldown-range", 2) == ["10", "60"]
    for absent in ("--max-np", "--slots-per-host", "--reset-limit", "--ssh-port",
                   "--ssh-identity-file", "--network-interfaces", "--verbose"):
        assert absent not in argv
    assert argv[-len(TRAIN):] == TRAIN


def test_every_option_maps_to_its_horovodrun_flag():
    opts = HorovodrunOptions(
        discovery_script=SCRIPT, min_np=2, max_np=8, np=4, slots_per_host=2,
        elastic_timeout=30, reset_limit=5, cooldown_range=(3, 9), ssh_port=2222,
        ssh_identity_file="/keys/id_ed25519", network_interfaces=("lo", "eth0"),
        start_timeout=45, horovodrun="/venv/bin/horovodrun", verbose=True)
    argv = build_horovodrun_command(opts, TRAIN)
    assert argv[0] == "/venv/bin/horovodrun"
    assert flag_values(argv, "-np") == ["4"]
    assert flag_values(argv, "--max-np") == ["8"]
    assert flag_values(argv, "--slots-per-host") == ["2"]
    assert flag_values(argv, "--elastic-timeout") == ["30"]
    assert flag_values(argv, "--reset-limit") == ["5"]
    assert flag_values(argv, "--blacklist-cooldown-range", 2) == ["3", "9"]
    assert flag_values(argv, "--ssh-port") == ["2222"]
    assert flag_values(argv, "--ssh-identity-file") == ["/keys/id_ed25519"]
    assert flag_values(argv, "--network-interfaces") == ["lo,eth0"]
    assert flag_values(argv, "--start-timeout") == ["45"]
    assert "--verbose" in argv
    # the training command comes last, untouched, even when it has flags horovodrun knows
    assert argv[-len(TRAIN):] == TRAIN
    assert argv.index("--verbose") < len(argv) - len(TRAIN)


def test_horovodrun_parses_the_command_it_is_given(monkeypatch):
    """The flags are ones this Horovod's own parser accepts, with the values we meant."""
    from horovod.runner import launch

    opts = HorovodrunOptions(
        discovery_script=SCRIPT, min_np=2, max_np=8, slots_per_host=2, elastic_timeout=30,
        reset_limit=5, cooldown_range=(3, 9), ssh_port=2222, ssh_identity_file="/k/id",
        network_interfaces=("lo",), start_timeout=45)
    monkeypatch.setattr("sys.argv", build_horovodrun_command(opts, TRAIN))
    args = launch.parse_args()
    assert args.host_discovery_script == SCRIPT
    assert (args.num_proc, args.min_num_proc, args.max_num_proc, args.slots) == (2, 2, 8, 2)
    assert (args.elastic_timeout, args.reset_limit, args.cooldown_range) == (30, 5, [3, 9])
    assert (args.ssh_port, args.ssh_identity_file, args.start_timeout) == (2222, "/k/id", 45)
    assert args.nics == {"lo"}
    assert args.command == TRAIN


@pytest.mark.parametrize("kwargs, message", [
    ({"discovery_script": "discover-hosts"}, "absolute path"),
    ({"min_np": 0}, "--min-np must be a positive integer, got 0"),
    ({"min_np": 4, "max_np": 2}, "--max-np 2 is below --min-np 4"),
    ({"min_np": 2, "max_np": 4, "np": 5}, "--np 5 is outside"),
    ({"slots_per_host": 0}, "--slots-per-host"),
    ({"elastic_timeout": 0}, "--elastic-timeout"),
    ({"reset_limit": -1}, "--reset-limit"),
    ({"cooldown_range": (9, 3)}, "--blacklist-cooldown-range needs 1 <= LOW <= HIGH, got 9 3"),
    ({"ssh_port": 70000}, "--ssh-port must be 1..65535, got 70000"),
    ({"network_interfaces": ("eth0; rm -rf /",)}, "bad network interface name"),
    ({"env": {"BAD NAME": "1"}}, "bad environment variable name 'BAD NAME'"),
])
def test_bad_values_are_refused_with_the_value_named(kwargs, message):
    base = {"discovery_script": SCRIPT, "min_np": 1}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        HorovodrunOptions(**(base | kwargs))


def test_an_empty_training_command_is_an_error():
    with pytest.raises(ConfigError, match="no training command"):
        build_horovodrun_command(HorovodrunOptions(discovery_script=SCRIPT, min_np=1), [])

