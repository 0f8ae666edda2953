"""Pure renderers: the pod's sshd_config and /etc/hosts, the kubeconfig."""
import base64
import json

from localcluster.kubelet import hosts_file
from localcluster.sshd import render_config
from localcluster.statefiles import render_kubeconfig


def test_sshd_config_has_what_horovodrun_needs():
    lines = render_config("127.5.6.7", 2222, "/s/key", "/s/auth").splitlines()
    for expected in ["ListenAddress 127.5.6.7:2222", "HostKey /s/key", "AuthorizedKeysFile /s/auth", "UsePAM no",
                     "StrictModes no", "MaxStartups 100:30:200", "PasswordAuthentication no",
                     "ClientAliveInterval 2", "ClientAliveCountMax 3"]:
        assert expected in lines


def test_hosts_file_maps_the_pod_name():
    assert "127.5.6.7\tworker-3" in hosts_file("127.5.6.7", "worker-3").splitlines()


def test_kubeconfig_has_server_token_and_ca():
    doc = json.loads(render_kubeconfig("https://127.0.0.1:1234", "tok", b"PEM"))
    ctx = doc["contexts"][0]["context"]
    assert doc["current-context"] == doc["contexts"][0]["name"] and ctx["namespace"] == "default"
    assert doc["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:1234",
                                             "certificate-authority-data": base64.b64encode(b"PEM").decode()}
    assert doc["users"][0]["user"] == {"token": "tok"}
