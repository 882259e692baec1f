"""The ipc lock files that keep a second daemon off the first one's endpoints, without a server.

``flock`` locks belong to an open file, so a second ``InstanceLock`` in this process conflicts with the
first exactly as another daemon's would (tests/server/test_instance.py does it with real servers).
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.errors import InstanceRunningError
from runtime.server.instance import InstanceLock, lock_holder, tcp_listener_pid


@pytest.fixture
def sock_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def held() -> Iterator[list[InstanceLock]]:
    locks: list[InstanceLock] = []
    yield locks
    for lock in locks:
        lock.release()


def take(held: list[InstanceLock], *endpoints: str) -> InstanceLock:
    lock = InstanceLock.acquire(list(endpoints))
    held.append(lock)
    return lock


def test_each_ipc_endpoint_gets_a_lock_file_holding_our_pid(sock_dir: Path, held: list[InstanceLock]) -> None:
    old = os.umask(0o022)
    try:
        take(held, f"ipc://{sock_dir}/a.sock", f"ipc://{sock_dir}/b.sock")
    finally:
        os.umask(old)
    for name in ("a.sock.lock", "b.sock.lock"):
        path = sock_dir / name
        assert path.read_text() == f"{os.getpid()}\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert lock_holder(path) == os.getpid()


def test_a_stale_pid_left_in_the_file_is_replaced_whole(sock_dir: Path, held: list[InstanceLock]) -> None:
    (sock_dir / "a.sock.lock").write_text("99999999999\n")
    take(held, f"ipc://{sock_dir}/a.sock")
    assert (sock_dir / "a.sock.lock").read_text() == f"{os.getpid()}\n"


def test_tcp_and_abstract_ipc_endpoints_take_no_lock_file(
    sock_dir: Path, held: list[InstanceLock], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(sock_dir)  # where a lock for a path without a folder would land
    take(held, "tcp://127.0.0.1:5555", "ipc://@lerobot-abstract", "inproc://x")
    take(held, "tcp://127.0.0.1:5555", "ipc://@lerobot-abstract")  # nothing to conflict on
    assert list(sock_dir.iterdir()) == []


def test_a_second_server_on_the_same_socket_is_refused_naming_the_endpoint_the_holder_and_the_lock(
    sock_dir: Path, held: list[InstanceLock]
) -> None:
    endpoint = f"ipc://{sock_dir}/policy.sock"
    take(held, endpoint)
    with pytest.raises(InstanceRunningError) as err:
        take(held, endpoint)
    assert str(err.value) == (
        f"{endpoint} is already served by another lerobot-runtime "
        f"(PID {os.getpid()}, lock {sock_dir}/policy.sock.lock); "
        "stop that one first (systemctl stop lerobot-runtime), or give this one other endpoints"
    )
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_a_holder_whose_file_says_no_pid_is_named_unknown(sock_dir: Path, held: list[InstanceLock]) -> None:
    endpoint = f"ipc://{sock_dir}/policy.sock"
    take(held, endpoint)
    (sock_dir / "policy.sock.lock").write_text("not a pid\n")
    with pytest.raises(InstanceRunningError, match=r"another lerobot-runtime \(PID unknown, lock "):
        take(held, endpoint)
    assert lock_holder(sock_dir / "policy.sock.lock") is None  # held, but by nobody we can name


def test_a_failed_acquire_releases_the_locks_it_took(sock_dir: Path, held: list[InstanceLock]) -> None:
    free, busy = f"ipc://{sock_dir}/free.sock", f"ipc://{sock_dir}/busy.sock"
    take(held, busy)
    with pytest.raises(InstanceRunningError, match=r"busy\.sock is already served"):
        take(held, free, busy)
    assert lock_holder(sock_dir / "free.sock.lock") is None
    take(held, free)  # free again


def test_release_frees_the_endpoints_and_keeps_the_files(sock_dir: Path, held: list[InstanceLock]) -> None:
    endpoint = f"ipc://{sock_dir}/policy.sock"
    first = InstanceLock.acquire([endpoint])
    first.release()
    first.release()  # twice is harmless
    assert (sock_dir / "policy.sock.lock").exists()
    assert lock_holder(sock_dir / "policy.sock.lock") is None
    take(held, endpoint)
    assert lock_holder(sock_dir / "policy.sock.lock") == os.getpid()


def test_a_lock_file_that_cannot_be_created_is_refused_naming_it_and_the_endpoint(sock_dir: Path) -> None:
    endpoint = f"ipc://{sock_dir}/missing/policy.sock"
    with pytest.raises(InstanceRunningError) as err:
        InstanceLock.acquire([endpoint])
    assert str(err.value).startswith(
        f"cannot create the lock file {sock_dir}/missing/policy.sock.lock for {endpoint}: [Errno 2] No such file"
    )
    assert isinstance(err.value.__cause__, FileNotFoundError)


def test_the_lock_files_are_not_inherited_by_child_processes(sock_dir: Path, held: list[InstanceLock]) -> None:
    take(held, f"ipc://{sock_dir}/policy.sock")
    target = os.path.realpath(sock_dir / "policy.sock.lock")
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    ours = [fd for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}") == target]
    assert len(ours) == 1
    assert not os.get_inheritable(ours[0])


def test_lock_holder_of_a_missing_or_unlocked_file_is_nobody(sock_dir: Path) -> None:
    assert lock_holder(sock_dir / "none.lock") is None
    (sock_dir / "left.lock").write_text(f"{os.getpid()}\n")  # a crashed server's file: no lock on it
    assert lock_holder(sock_dir / "left.lock") is None


def test_lock_holder_leaves_the_lock_as_it_found_it(sock_dir: Path, held: list[InstanceLock]) -> None:
    endpoint = f"ipc://{sock_dir}/policy.sock"
    (sock_dir / "policy.sock.lock").write_text("1\n")
    assert lock_holder(sock_dir / "policy.sock.lock") is None
    take(held, endpoint)  # looking did not keep a lock
    assert lock_holder(sock_dir / "policy.sock.lock") == os.getpid()
    assert lock_holder(sock_dir / "policy.sock.lock") == os.getpid()  # nor take the server's


def test_the_tcp_listener_is_named_when_visible() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        assert tcp_listener_pid(f"tcp://127.0.0.1:{port}") == os.getpid()
    finally:
        holder.close()
    assert tcp_listener_pid(f"tcp://127.0.0.1:{port}") is None


def test_a_connected_but_not_listening_port_is_not_a_listener() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    port = server.getsockname()[1]
    server.close()  # the connection stays; nobody listens on the port any more
    try:
        assert tcp_listener_pid(f"tcp://127.0.0.1:{port}") is None
    finally:
        client.close()
        peer.close()


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:*", "tcp://localhost", "tcp://[::1]:x"])
def test_an_endpoint_without_a_port_number_has_no_listener(endpoint: str) -> None:
    assert tcp_listener_pid(endpoint) is None
