"""Closing by RFC 6455, measured from outside with a raw socket: what tabd answers to a
peer's close frame (echo a valid one; 1002 for a malformed one or a code the RFC forbids
on the wire; 1007 for a reason that is not UTF-8), and that after failing a connection for
a protocol error it drops the TCP connection promptly instead of waiting for the peer.
Other clients are untouched throughout."""
import json
import socket
import struct
import time

import pytest

import rawws

# A failed connection is dropped "promptly": at once after its close frame (RFC 6455
# 7.1.7), well under the 5 s a closing peer gets to answer, with room for a busy machine.
PROMPT = 2.5


def frame(opcode, payload=b"", fin=True, rsv=0, masked=True):
    """One client frame, with a real mask key (so a server that ignored it would misread)."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    if n < 126:
        head = bytes([b0, (0x80 if masked else 0) | n])
    elif n < 65536:
        head = bytes([b0, (0x80 if masked else 0) | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([b0, (0x80 if masked else 0) | 127]) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    key = b"\x37\xfa\x21\x3d"
    return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason


def welcomed(daemon):
    """A raw connection past its welcome."""
    s = rawws.connect(daemon.host)
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 1 and json.loads(data)["type"] == "welcome":
            return s


def server_close(s):
    """The server's close frame (skipping text frames before it): (code or None, reason)."""
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 8:
            if len(data) >= 2:
                return struct.unpack("!H", data[:2])[0], data[2:]
            return None, data


def seconds_until_dropped(s, limit=10.0):
    """Seconds until the server closes the TCP connection (recv gives EOF), reading
    whatever comes first; fails if it stays open `limit` seconds."""
    start = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    raise AssertionError(f"the TCP connection stayed open {limit} s")


def answered_ping(s, ref):
    """Sends a ping on a raw connection and reads until its pong."""
    rawws.send_text(s, json.dumps({"type": "ping", "ref": ref}).encode())
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 1 and json.loads(data).get("ref") == ref:
            return


def another_client_still_served(daemon):
    """A fresh client is welcomed and answered: the server serves on."""
    s = welcomed(daemon)
    answered_ping(s, "alive")
    s.close()


@pytest.mark.parametrize("code", [1000, 1001, 1003, 1007, 1008, 1011, 3000, 4000, 4999])
def test_a_valid_close_is_echoed_with_its_code(daemon, code):
    s = welcomed(daemon)
    s.sendall(frame(8, close_payload(code, b"bye")))
    got, _ = server_close(s)
    assert got == code
    assert seconds_until_dropped(s) < PROMPT
    s.close()


def test_an_empty_close_is_answered_with_an_empty_close(daemon):
    s = welcomed(daemon)
    s.sendall(frame(8))
    got, reason = server_close(s)
    assert (got, reason) == (None, b"")
    assert seconds_until_dropped(s) < PROMPT
    s.close()


def test_a_one_byte_close_payload_is_a_protocol_error(daemon):
    # RFC 6455 5.5.1: a close body, if any, starts with a two-byte code.
    s = welcomed(daemon)
    s.sendall(frame(8, b"\x03"))
    got, _ = server_close(s)
    assert got == 1002
    assert seconds_until_dropped(s) < PROMPT
    s.close()
    another_client_still_served(daemon)


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535])
def test_a_close_code_the_rfc_forbids_on_the_wire_is_a_protocol_error(daemon, code):
    s = welcomed(daemon)
    s.sendall(frame(8, close_payload(code)))
    got, _ = server_close(s)
    assert got == 1002, f"close code {code} answered with {got}"
    assert seconds_until_dropped(s) < PROMPT
    s.close()


def frames_until_eof(s, limit=PROMPT):
    """Every frame the server sends until it closes the TCP connection (within `limit` s)."""
    s.settimeout(limit)
    frames = []
    try:
        while True:
            frames.append(rawws.recv_frame(s))
    except (ConnectionError, OSError) as e:
        assert not isinstance(e, socket.timeout), f"the TCP connection stayed open {limit} s"
    return frames


def test_a_close_reason_that_is_not_utf8_is_refused_not_echoed(daemon):
    # Answered with a close of tabd's own (1007), never an echo, then dropped.
    s = welcomed(daemon)
    s.sendall(frame(8, close_payload(1000, b"\xff\xfe bad")))
    closes = [payload for opcode, payload in frames_until_eof(s) if opcode == 8]
    assert [struct.unpack("!H", c[:2])[0] for c in closes] == [1007], closes
    s.close()
    another_client_still_served(daemon)


PROTOCOL_ERRORS = {
    "reserved bit 1": frame(1, b'{"type":"ping"}', rsv=4),
    "reserved bits 2 and 3": frame(1, b'{"type":"ping"}', rsv=3),
    "reserved data opcode 3": frame(3, b"x"),
    "reserved data opcode 7": frame(7, b"x"),
    "reserved control opcode 0xB": frame(0xB, b"x"),
    "reserved control opcode 0xF": frame(0xF),
    "fragmented ping": frame(9, b"x", fin=False),
    "continuation without a start": frame(0, b"x"),
    "a new message inside a fragmented one": frame(1, b"a", fin=False) + frame(1, b"b"),
    # RFC 6455 5.1: a server must close a connection whose client sends an unmasked frame.
    "unmasked text frame": frame(1, b'{"type":"ping"}', masked=False),
}


@pytest.mark.parametrize("name", sorted(PROTOCOL_ERRORS))
def test_a_protocol_error_is_closed_with_1002_and_the_connection_dropped_promptly(daemon, name):
    watcher = welcomed(daemon)
    s = welcomed(daemon)
    s.sendall(PROTOCOL_ERRORS[name])
    got, _ = server_close(s)
    assert got == 1002, f"{name}: closed with {got}"
    # Not waiting for the peer's answer: the peer here never answers.
    assert seconds_until_dropped(s) < PROMPT, name
    s.close()
    # The watcher is still served.
    answered_ping(watcher, "w")
    watcher.close()


def test_a_control_frame_over_125_bytes_is_closed_with_1002_and_dropped_at_once(daemon):
    # Nothing of the ping is answered: no pong, one close (1002), then the end of the stream.
    s = welcomed(daemon)
    s.sendall(frame(9, b"x" * 126))
    frames = frames_until_eof(s)
    closes = [payload for opcode, payload in frames if opcode == 8]
    assert all(opcode in (1, 8) for opcode, _ in frames), frames
    assert len(closes) == 1 and struct.unpack("!H", closes[0][:2])[0] == 1002, frames
    s.close()
    another_client_still_served(daemon)


def test_a_close_of_tabds_own_is_answered_and_the_connection_then_dropped(daemon):
    # tabd closes (here for a binary frame, 1003), the peer answers its close, and the TCP
    # connection goes.
    s = welcomed(daemon)
    s.sendall(frame(2, b"\x00\x01"))
    got, _ = server_close(s)
    assert got == 1003
    s.sendall(frame(8, close_payload(1003)))
    assert seconds_until_dropped(s) < PROMPT
    s.close()
