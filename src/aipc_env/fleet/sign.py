"""minisign-compatible Ed25519 signatures (https://jedisct1.github.io/minisign/), so an admin can check a bundle with
the `minisign` CLI they already have, and aipc-env can check it without one.

Formats (all base64 lines under an `untrusted comment:` line):
- public key: "Ed" + key id (8) + Ed25519 public key (32);
- secret key: "Ed" + kdf ("Sc" scrypt, or two zero bytes: unencrypted) + "B2" + salt (32) + opslimit (8, LE) +
  memlimit (8, LE) + [key id (8) + secret key (64: seed + public) + BLAKE2b-256 checksum (32)], the bracket XORed
  with scrypt(password) when encrypted;
- signature (`FILE.minisig`): "ED" + key id + Ed25519(BLAKE2b-512(file)), then `trusted comment: ...` and
  Ed25519(signature + trusted comment), which binds the comment.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from aipc_env.errors import AipcError, ExitCode, InputError

__all__ = [
    "PublicKey",
    "SecretKey",
    "SignatureInvalid",
    "generate_keypair",
    "read_public_key",
    "read_secret_key",
    "sign_file",
    "verify_file",
    "write_keypair",
]

PREHASHED, LEGACY, KDF_SCRYPT, KDF_NONE, CHK_BLAKE2B = b"ED", b"Ed", b"Sc", b"\x00\x00", b"B2"
OPSLIMIT, MEMLIMIT = 33554432, 1073741824  # minisign's defaults (scrypt ~1 GiB)
MAX_KEY_FILE = 4096
MAX_OPSLIMIT, MAX_MEMLIMIT = 2 * OPSLIMIT, 2 * MEMLIMIT
"""Scrypt limits read from a secret key: twice minisign's (a key may ask for more work, not for 2^62 bytes)."""


class SignatureInvalid(AipcError):
    exit_code = ExitCode.PROBLEMS


@dataclass(frozen=True)
class PublicKey:
    key_id: bytes
    key: bytes

    @property
    def key_id_hex(self) -> str:
        return self.key_id[::-1].hex().upper()  # how minisign prints it


@dataclass(frozen=True)
class SecretKey:
    key_id: bytes
    seed: bytes
    public: bytes


def _read_small(path: Path, what: str) -> str:
    """A minisign file (key or signature), read from the stream up to MAX_KEY_FILE (a device such as /dev/zero has
    no size to check first), strict UTF-8."""
    from aipc_env.core.fileio import read_text

    try:
        return read_text(path, what, max_bytes=MAX_KEY_FILE)
    except InputError as exc:
        if "larger than" in exc.message:
            raise InputError(
                f"{what} is too large to be a minisign file (more than {MAX_KEY_FILE} bytes)",
                path=path,
                fix="pass the file minisign (or aipc-env fleet keygen) wrote",
            ) from None
        raise


def _b64_line(path: Path, what: str) -> bytes:
    lines = [ln.strip() for ln in _read_small(path, what).splitlines() if ln.strip()]
    body = [ln for ln in lines if not ln.startswith(("untrusted comment:", "trusted comment:"))]
    try:
        return base64.b64decode(body[0], validate=True)
    except (IndexError, ValueError):
        raise InputError(
            f"not a minisign {what}", path=path, fix="pass the file minisign (or aipc-env fleet keygen) wrote"
        ) from None


def _pickparams(opslimit: int, memlimit: int) -> tuple[int, int, int]:
    """libsodium's crypto_pwhash_scryptsalsa208sha256 parameter choice (log2 N, r, p), as minisign uses it."""
    opslimit = max(opslimit, 32768)
    r = 8
    if opslimit < memlimit / 32:
        p, max_n = 1, opslimit / (r * 4)
    else:
        p, max_n = 0, memlimit / (r * 128)
    n_log2 = 1
    while n_log2 < 63 and (1 << n_log2) <= max_n / 2:
        n_log2 += 1
    if p == 0:
        max_rp = min((opslimit / 4) / (1 << n_log2), 0x3FFFFFFF)
        p = int(max_rp / r)
    return n_log2, r, p


def _scrypt_stream(password: bytes, salt: bytes, opslimit: int, memlimit: int, length: int) -> bytes:
    n_log2, r, p = _pickparams(opslimit, memlimit)
    maxmem = min(memlimit + (1 << 24), (1 << 31) - 1)  # OpenSSL's ceiling for maxmem
    try:
        return hashlib.scrypt(password, salt=salt, n=1 << n_log2, r=r, p=p, maxmem=maxmem, dklen=length)
    except (ValueError, MemoryError) as exc:
        raise InputError(
            f"scrypt cannot derive the key with these limits ({exc})",
            fix="use the secret key minisign (or aipc-env fleet keygen) wrote",
        ) from None


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def read_public_key(path: Path) -> PublicKey:
    raw = _b64_line(path, "public key")
    if len(raw) != 42 or raw[:2] != LEGACY:
        raise InputError("not a minisign Ed25519 public key", path=path)
    return PublicKey(raw[2:10], raw[10:42])


def read_secret_key(path: Path, password: str | None = None) -> SecretKey:
    raw = _b64_line(path, "secret key")
    if len(raw) != 158 or raw[:2] != LEGACY or raw[4:6] != CHK_BLAKE2B:
        raise InputError("not a minisign Ed25519 secret key", path=path)
    kdf, salt = raw[2:4], raw[6:38]
    opslimit, memlimit = struct.unpack("<QQ", raw[38:54])
    keynum = raw[54:158]
    if kdf == KDF_SCRYPT:
        if not (0 < opslimit <= MAX_OPSLIMIT and 0 < memlimit <= MAX_MEMLIMIT):
            raise InputError(
                f"the secret key asks for scrypt limits (opslimit {opslimit}, memlimit {memlimit}) beyond "
                f"what minisign writes ({OPSLIMIT}, {MEMLIMIT}; at most {MAX_OPSLIMIT}, {MAX_MEMLIMIT} "
                "are accepted): a damaged or hostile key",
                path=path,
                fix="use the secret key minisign (or aipc-env fleet keygen) wrote",
            )
        if password is None:
            raise InputError("the secret key is encrypted", path=path, fix="set AIPC_ENV_SIGN_PASSWORD to its password")
        keynum = _xor(keynum, _scrypt_stream(password.encode(), salt, opslimit, memlimit, len(keynum)))
    elif kdf != KDF_NONE:
        raise InputError("unknown key derivation in the secret key", path=path)
    key_id, secret, checksum = keynum[:8], keynum[8:72], keynum[72:104]
    unchecked = kdf == KDF_NONE and checksum == bytes(32)  # minisign -W writes no checksum
    if not unchecked and hashlib.blake2b(LEGACY + key_id + secret, digest_size=32).digest() != checksum:
        raise InputError(
            "the secret key does not check out (wrong password, or a damaged file)",
            path=path,
            key="AIPC_ENV_SIGN_PASSWORD" if kdf == KDF_SCRYPT else None,
        )
    return SecretKey(key_id, secret[:32], secret[32:])


def generate_keypair() -> tuple[SecretKey, PublicKey]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = os.urandom(8)
    return SecretKey(key_id, seed, public), PublicKey(key_id, public)


def write_keypair(
    secret: SecretKey, public: PublicKey, secret_path: Path, public_path: Path, password: str | None = None
) -> None:
    """minisign's key files; the secret key encrypted with scrypt when a password is given."""
    from aipc_env.core.outputs import commit_files

    sk = secret.seed + secret.public
    checksum = hashlib.blake2b(LEGACY + secret.key_id + sk, digest_size=32).digest() if password else bytes(32)
    keynum = secret.key_id + sk + checksum  # no checksum when unencrypted, as minisign -W writes it
    salt = os.urandom(32) if password else bytes(32)
    ops, mem = (OPSLIMIT, MEMLIMIT) if password else (0, 0)
    if password:
        keynum = _xor(keynum, _scrypt_stream(password.encode(), salt, ops, mem, len(keynum)))
    blob = LEGACY + (KDF_SCRYPT if password else KDF_NONE) + CHK_BLAKE2B + salt + struct.pack("<QQ", ops, mem) + keynum
    secret_text = (
        "untrusted comment: minisign "
        + ("encrypted " if password else "")
        + "secret key\n"
        + base64.b64encode(blob).decode()
        + "\n"
    )
    public_text = (
        f"untrusted comment: minisign public key {public.key_id_hex}\n"
        + base64.b64encode(LEGACY + public.key_id + public.key).decode()
        + "\n"
    )
    # both or neither, across Ctrl-C (aipc_env.core.outputs): the next keygen finishes or undoes an interrupted pair
    commit_files(
        {secret_path: secret_text.encode(), public_path: public_text.encode()},
        keypair_journal(secret_path),
        modes={secret_path: 0o600},
    )


def keypair_journal(secret_path: Path) -> Path:
    from aipc_env.core.outputs import JOURNAL_SUFFIX

    return secret_path.with_name(f".{secret_path.name}{JOURNAL_SUFFIX}")


def _prehash(path: Path) -> bytes:
    digest = hashlib.blake2b(digest_size=64)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def sign_file(path: Path, secret: SecretKey, trusted_comment: str, untrusted_comment: str = "signature from aipc-env") -> Path:
    """Write `path`.minisig (prehashed, as minisign 0.8+ signs by default)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from aipc_env.core.fileio import atomic_write_text

    if "\n" in trusted_comment or "\r" in trusted_comment:
        raise InputError("a trusted comment is one line")
    private = Ed25519PrivateKey.from_private_bytes(secret.seed)
    signature = private.sign(_prehash(path))
    global_sig = private.sign(signature + trusted_comment.encode("utf-8"))
    target = path.with_name(path.name + ".minisig")
    atomic_write_text(
        target,
        f"untrusted comment: {untrusted_comment}\n"
        + base64.b64encode(PREHASHED + secret.key_id + signature).decode()
        + "\n"
        + f"trusted comment: {trusted_comment}\n"
        + base64.b64encode(global_sig).decode()
        + "\n",
    )
    return target


def verify_file(path: Path, public: PublicKey, signature_path: Path | None = None) -> str:
    """Verify `path` against its .minisig with the trusted key; the trusted comment. SignatureInvalid otherwise."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    sig_path = signature_path or path.with_name(path.name + ".minisig")
    if not sig_path.is_file():
        raise SignatureInvalid("no signature", path=sig_path, fix="sign it: aipc-env fleet bundle --sign KEY")
    try:
        lines = _read_small(sig_path, "signature").splitlines()[:4]
        sig = base64.b64decode(lines[1].strip(), validate=True)
        comment = lines[2].removeprefix("trusted comment: ")
        global_sig = base64.b64decode(lines[3].strip(), validate=True)
    except (OSError, IndexError, ValueError, UnicodeDecodeError, InputError):
        raise SignatureInvalid("not a minisign signature file", path=sig_path) from None
    if len(sig) != 74 or sig[:2] not in (PREHASHED, LEGACY) or not lines[2].startswith("trusted comment: "):
        raise SignatureInvalid("not a minisign signature file", path=sig_path)
    if sig[2:10] != public.key_id:
        raise SignatureInvalid(
            f"signed with key {sig[2:10][::-1].hex().upper()}, not the trusted key {public.key_id_hex}",
            path=sig_path,
            fix="get the bundle from its admin, or trust that admin's public key",
        )
    message = _prehash(path) if sig[:2] == PREHASHED else path.read_bytes()
    key = Ed25519PublicKey.from_public_bytes(public.key)
    try:
        key.verify(sig[10:], message)
        key.verify(global_sig, sig[10:] + comment.encode("utf-8"))
    except InvalidSignature:
        raise SignatureInvalid(
            f"the signature of {path.name} does not verify: the file or its trusted comment was changed after signing",
            path=sig_path,
            fix="get an intact copy; nothing was installed",
        ) from None
    return comment
