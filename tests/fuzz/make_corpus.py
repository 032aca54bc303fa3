#!/usr/bin/env python3
# Writes the fuzz targets' seed corpora into tests/fuzz/corpus/<target>/ (a one-off: its output is
# committed). Plain Python, no NumPy: each format written from its specification, as Troupe's
# writers write it, plus a few edge cases. A real training checkpoint comes from dist_sgd:
#   build/bin/troupe launch --nproc 1 -- build/bin/dist_sgd --epochs 1 --subset 640 \
#     --checkpoint-dir /tmp/seed-ckpt --checkpoint-every 5
#   tests/fuzz/make_corpus.py /tmp/seed-ckpt/rank-0/step-5
import gzip, json, os, struct, sys

here = os.path.dirname(os.path.abspath(__file__))

def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def npy(descr, shape, payload, fortran=False, version=1):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", "".join("%d," % s for s in shape))
    size_field = 2 if version == 1 else 4
    pad = (-(10 + (size_field - 2) + len(header) + 1)) % 64
    header = header + " " * pad + "\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + payload

put("npy", "f32_2x3", npy("<f4", (2, 3), struct.pack("<6f", 1, 2, 3, 4, 5, 6)))
put("npy", "i64_scalar", npy("<i8", (), struct.pack("<q", -7)))
put("npy", "bool_4", npy("|b1", (4,), bytes([1, 0, 1, 1])))
put("npy", "f64_fortran_2x2", npy("<f8", (2, 2), struct.pack("<4d", 1, 2, 3, 4), fortran=True))
put("npy", "u8_empty_v2", npy("|u1", (0, 5), b"", version=2))
put("npy", "truncated", npy("<f4", (4,), struct.pack("<2f", 1, 2)))

def safetensors(tensors, metadata=None):
    header, blobs, offset = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)

put("safetensors", "two", safetensors({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                                       "b": ("I64", [2], struct.pack("<2q", 5, 6))}, {"format": "pt"}))
put("safetensors", "scalar_bf16", safetensors({"s": ("BF16", [], b"\x80\x3f")}))
put("safetensors", "empty", safetensors({}))
put("safetensors", "overlap", safetensors({"a": ("U8", [2], b"ab"), "b": ("U8", [2], b"cd")}).replace(b"[2, 4]", b"[1, 3]"))

def idx(type_code, dims, payload):
    return struct.pack(">BBBB", 0, 0, type_code, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload

labels = idx(0x08, [5], bytes([9, 2, 1, 1, 6]))
images = idx(0x08, [2, 3, 3], bytes(range(18)))
put("idx", "labels", b"\x00" + labels)
put("idx", "images", b"\x00" + images)
put("idx", "labels_gz", b"\x01" + gzip.compress(labels, mtime=0))
put("idx", "floats", b"\x00" + idx(0x0D, [2], struct.pack(">2f", 1.5, -2)))
put("idx", "short", b"\x00" + idx(0x08, [10], bytes(3)))

# Call frames (net/remote/call_frame.h): 40-byte header, text, value; parts after (input layout
# of call_frame_fuzz.cpp: part count, u16 sizes, frame, parts).
def value_list(items): return bytes([7]) + struct.pack("<I", len(items)) + b"".join(items)
def value_int(v): return bytes([3]) + struct.pack("<q", v)
def value_str(s): return bytes([5]) + struct.pack("<I", len(s)) + s
def value_tensor(dtype, dims): return bytes([6, dtype, len(dims)]) + b"".join(struct.pack("<q", d) for d in dims)
def frame(kind, actor, request, text, value, tensors):
    return struct.pack("<IBBHQQIIII", 0x43415254, 1, kind, 0, actor, request, len(text), len(value), tensors, 0) + text + value
def call_input(f, parts):
    return bytes([len(parts)]) + b"".join(struct.pack("<H", len(p)) for p in parts) + f + b"".join(parts)

put("call_frame", "request", call_input(frame(2, 3, 17, b"forward", value_list([value_int(4), value_str(b"x")]), 0), []))
put("call_frame", "request_tensor", call_input(frame(2, 1, 2, b"forward", value_list([value_tensor(0, [2, 2])]), 1),
                                               [struct.pack("<4f", 1, 2, 3, 4)]))
put("call_frame", "reply_none", call_input(frame(4, 0, 17, b"", bytes([0]), 0), []))
put("call_frame", "failure", call_input(frame(5, 0, 9, b"ValueError\x00bad", bytes([0]), 0), []))
put("call_frame", "stop", call_input(frame(9, 5, 3, b"", bytes([0]), 0), []))

# XLM-R name mapping (input layout of xlmr_names_fuzz.cpp: a start byte, then 4-byte edits).
put("xlmr_names", "torchtext_complete", b"\x02")
put("xlmr_names", "hugging_face_complete", b"\x03")
put("xlmr_names", "hf_reshaped", b"\x03\x01\x05\x01\x02")
put("xlmr_names", "torchtext_edits", b"\x02\x00\x03\x00\x00\x04\x01\x02\x03")
put("xlmr_names", "empty", b"\x00")

# Checkpoints (models/train/checkpoint.h; input layout of checkpoint_fuzz.cpp).
def checkpoint_input(state, tensors, fix_hash):
    text = json.dumps(state).encode()
    return bytes([1 if fix_hash else 0]) + struct.pack("<H", len(text)) + text + tensors

tiny = safetensors({"model.fc.weight": ("F32", [1], struct.pack("<f", 1))})
state = {"format": "troupe-checkpoint", "version": 1, "step": 0, "state": {"epoch": 0}, "tensors_bytes": 0,
         "tensors_fnv1a": "0"}
put("checkpoint", "foreign_model", checkpoint_input(state, tiny, True))
put("checkpoint", "wrong_hash", checkpoint_input(state, tiny, False))
put("checkpoint", "not_json", b"\x01\x05\x00{\"a\":" + tiny)
if len(sys.argv) > 1:  # a real Net checkpoint (see the header)
    real = json.load(open(os.path.join(sys.argv[1], "state.json")))
    real["step"] = 0
    put("checkpoint", "net_sgd", checkpoint_input(real, open(os.path.join(sys.argv[1], "tensors.safetensors"), "rb").read(), True))

# Rendezvous messages (net/bootstrap/rendezvous_messages.h; input layout of rendezvous_fuzz.cpp: byte 0 % 3
# picks registration, table or file line, / 3 a table's world size; the text after it).
def address(tcp, ipc, host="b1d3/2049:131073/pid:[4026531836]/net:[4026531840]"):
    return "%s|%s|%s" % (tcp, ipc, host)
a0 = address("tcp://10.0.0.1:41234", "ipc:///tmp/troupe-1234-0-0.sock")
a1 = address("tcp://10.0.0.2:41235", "ipc:///tmp/troupe-1240-1-0.sock")
a6 = address("tcp://[fe80::1%eth0]:29501", "ipc:///tmp/troupe-77-2-0.sock")
tcp_only = address("tcp://[::1]:41000", "")
def registration(*lines): return b"\x00" + "\n".join(lines).encode()
def answer(world, *lines): return bytes([1 + 3 * world]) + "\n".join(lines).encode()
def file_line(text): return b"\x02" + text.encode()

put("rendezvous", "register", registration("register", "1", "2", a1))
put("rendezvous", "register_ipv6", registration("register", "2", "3", a6))
put("rendezvous", "register_tcp_only", registration("register", "3", "4", tcp_only))
put("rendezvous", "register_bad_world", registration("register", "1", "two", a1))
put("rendezvous", "register_direct", registration("register", "1", "2", a1 + "|10.0.0.2:41236"))
put("rendezvous", "register_empty_direct", registration("register", "1", "2", a1 + "|"))
put("rendezvous", "register_3_lines", registration("register", "1", "2"))
put("rendezvous", "table", answer(2, "table", a0, a1))
put("rendezvous", "table_ipv6", answer(3, "table", a0, a6, tcp_only))
put("rendezvous", "table_short", answer(3, "table", a0, a1))
put("rendezvous", "table_direct", answer(2, "table", a0 + "|10.0.0.1:41237", a1 + "|10.0.0.2:41236"))
put("rendezvous", "table_bad_address", answer(2, "table", a0, "tcp://10.0.0.2:41235"))
put("rendezvous", "answer_error", answer(2, "error", "rendezvous: rank 1 says world size 3, rank 0 says 2"))
put("rendezvous", "answer_timeout", answer(3, "timeout", "rendezvous tcp://10.0.0.1:29500: rank(s) 2 did not register within the timeout"))
put("rendezvous", "file_line", file_line("troupe1 run-7 1 2 %s\n" % a1))
put("rendezvous", "file_line_ipv6", file_line("troupe1 - 2 3 %s" % a6))
put("rendezvous", "file_line_crlf", file_line("troupe1\trun-7  0 2 %s\r\n" % tcp_only))
put("rendezvous", "file_line_extra_field", file_line("troupe1 run-7 1 2 %s extra" % a1))
put("rendezvous", "file_line_other_magic", file_line("troupe2 run-7 1 2 %s" % a1))

# Handshake messages (net/handshake.h; input layout of handshake_fuzz.cpp: byte 0 % 2: 0 the server
# end, a hello then a proof; 1 the client end, a challenge). The job id is libsodium's KDF
# (BLAKE2b, subkey id 3 as salt, context "troupejb") of the fuzz target's secret, bytes 0..31.
import hashlib
fuzz_secret = bytes(range(32))
job_id = hashlib.blake2b(b"", digest_size=16, key=fuzz_secret, salt=struct.pack("<Q", 3) + bytes(8),
                         person=b"troupejb" + bytes(8)).digest()

def hello(client, server, lane=0, path=1, flags=0, version=1, jid=job_id, magic=b"TRPH"):
    return magic + struct.pack("<I", version) + jid + struct.pack("<IIiiI", path, lane, client, server, flags) + bytes(range(32))

put("handshake", "hello_then_proof", b"\x00" + hello(0, 1) + b"TRPP" + bytes(32))
put("handshake", "hello_stripe", b"\x00" + hello(2, 1, lane=3) + b"TRPP" + bytes(32))
put("handshake", "hello_other_job", b"\x00" + hello(0, 1, jid=bytes(16)))
put("handshake", "hello_wrong_server", b"\x00" + hello(0, 2))
put("handshake", "hello_as_itself", b"\x00" + hello(1, 1))
put("handshake", "hello_rank_beyond", b"\x00" + hello(9, 1))
put("handshake", "hello_version_2", b"\x00" + hello(0, 1, version=2))
put("handshake", "hello_short", b"\x00" + hello(0, 1)[:40])
put("handshake", "http", b"\x00GET / HTTP/1.0\r\nHost: x\r\n\r\n" + bytes(60))
put("handshake", "challenge", b"\x01TRPC" + bytes(64))
put("handshake", "challenge_short", b"\x01TRPC" + bytes(10))
put("handshake", "challenge_as_proof", b"\x01TRPP" + bytes(64))

# Sealed records (net/sealed_stream.h; input layout of sealed_fuzz.cpp: byte 0 % 2: 0 the wire, records
# under the key bytes 0..31; 1 a round trip, byte 1 a bit to flip, then a plaintext). AES-256-GCM,
# the record's number as the nonce (8 bytes little-endian, 4 zero), its length field as associated
# data. Whole records need the `cryptography` package (Debian: python3-cryptography); without it
# only the malformed ones are written.
seal_key = bytes(range(32))

def sealed(number, plain):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    length = struct.pack("<I", len(plain))
    return length + AESGCM(seal_key).encrypt(struct.pack("<Q", number) + bytes(4), plain, length)

put("sealed", "announces_too_much", b"\x00" + struct.pack("<I", 0xFFFFFFFF) + bytes(32))
put("sealed", "just_past_the_limit", b"\x00" + struct.pack("<I", (16 << 20) + 1) + bytes(32))
put("sealed", "forged", b"\x00" + struct.pack("<I", 8) + bytes(8 + 16))
put("sealed", "length_only", b"\x00" + struct.pack("<I", 3))
put("sealed", "round_trip_empty", b"\x01\x00")
put("sealed", "round_trip_header", b"\x01\x07" + b"TRPF" + bytes(60))
put("sealed", "round_trip_text", b"\x01\xff" + b"a record of an encrypted job's direct link")
try:
    first, second = sealed(0, b"frame header and payload"), sealed(1, bytes(100))
    put("sealed", "two_records", b"\x00" + first + second)
    put("sealed", "empty_record", b"\x00" + sealed(0, b""))
    put("sealed", "out_of_order", b"\x00" + second + first)
    put("sealed", "replayed", b"\x00" + first + first)
    put("sealed", "cut_short", b"\x00" + first + second[:40])
    put("sealed", "tag_altered", b"\x00" + first[:-1] + bytes([first[-1] ^ 1]))
except ImportError:
    pass
