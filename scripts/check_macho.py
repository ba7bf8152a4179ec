#!/usr/bin/env python3
"""Checks a macOS executable built on Linux, where it cannot be run: the Mach-O header names the
wanted CPU, the oldest macOS it asks for is the one the release promises, it loads only system
libraries, and an arm64 binary carries an ad-hoc code signature whose page hashes match the file
(Apple silicon kills an arm64 binary with no valid signature before it runs, and a signature goes stale
if anything rewrites the file after the link). An x86-64 binary needs none; if it has one, it is checked.

    check_macho.py FILE --arch arm64|x86_64 --min-os 11.0
"""
import argparse
import hashlib
import struct
import sys

CPU = {"arm64": 0x0100000C, "x86_64": 0x01000007}
LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_CODE_SIGNATURE = 0x0C, 0x80000018, 0x1D
LC_VERSION_MIN_MACOSX, LC_BUILD_VERSION = 0x24, 0x32
SYSTEM = ("/usr/lib/", "/System/Library/")


def version(v):
    return f"{v >> 16}.{(v >> 8) & 0xFF}"


def check(path, arch, min_os):
    data = open(path, "rb").read()
    problems = []
    magic, cputype, _sub, filetype, ncmds, _size, _flags, _res = struct.unpack_from("<IiiIIIII", data, 0)
    if magic != 0xFEEDFACF:
        return [f"not a 64-bit Mach-O file (magic {magic:#x})"]
    if cputype != CPU[arch]:
        problems.append(f"CPU type {cputype:#x}, not {arch}")
    if filetype != 2:
        problems.append(f"file type {filetype}, not an executable")
    off = 32
    minos = None
    dylibs = []
    signature = None
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        if cmd == LC_BUILD_VERSION:
            platform, minos_v = struct.unpack_from("<II", data, off + 8)
            if platform != 1:
                problems.append(f"built for platform {platform}, not macOS")
            minos = minos_v
        elif cmd == LC_VERSION_MIN_MACOSX:
            minos = struct.unpack_from("<I", data, off + 8)[0]
        elif cmd in (LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB):
            name_off = struct.unpack_from("<I", data, off + 8)[0]
            dylibs.append(data[off + name_off : off + size].split(b"\0", 1)[0].decode())
        elif cmd == LC_CODE_SIGNATURE:
            signature = struct.unpack_from("<II", data, off + 8)
        off += size
    if minos is None:
        problems.append("no minimum macOS version")
    elif version(minos) != min_os:
        problems.append(f"asks for macOS {version(minos)} or later, not {min_os}")
    for d in dylibs:
        if not d.startswith(SYSTEM):
            problems.append(f"loads {d}, which is not a system library")
    if signature is not None:
        problems += check_signature(data, *signature)
    elif arch == "arm64":
        problems.append("no code signature (Apple silicon runs no unsigned binary)")
    return problems, dylibs, minos, signature is not None


def check_signature(data, dataoff, datasize):
    blob = data[dataoff : dataoff + datasize]
    magic, _length, count = struct.unpack_from(">III", blob, 0)
    if magic != 0xFADE0CC0:
        return [f"code signature is not a SuperBlob (magic {magic:#x})"]
    for i in range(count):
        slot, boff = struct.unpack_from(">II", blob, 12 + 8 * i)
        if slot != 0:
            continue
        cd = blob[boff:]
        (cd_magic, _l, _v, _flags, hash_off, _ident, _nspecial, ncode, code_limit, hash_size, hash_type, _plat,
         page_log) = struct.unpack_from(">IIIIIIIIIBBBB", cd, 0)
        if cd_magic != 0xFADE0C02:
            return [f"slot 0 is not a CodeDirectory (magic {cd_magic:#x})"]
        algo = {1: hashlib.sha1, 2: hashlib.sha256}.get(hash_type)
        if algo is None:
            return [f"unknown code hash type {hash_type}"]
        if code_limit != dataoff:
            return [f"signature covers {code_limit} bytes, but the code is {dataoff}"]
        page = 1 << page_log
        bad = 0
        for n in range(ncode):
            want = cd[hash_off + n * hash_size : hash_off + (n + 1) * hash_size]
            got = algo(data[n * page : min((n + 1) * page, code_limit)]).digest()[:hash_size]
            bad += want != got
        if ncode != (code_limit + page - 1) // page:
            return [f"signature has {ncode} page hashes for {code_limit} bytes"]
        return [f"{bad} of {ncode} signed pages do not match the file"] if bad else []
    return ["code signature has no CodeDirectory"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--arch", choices=sorted(CPU), required=True)
    ap.add_argument("--min-os", required=True)
    a = ap.parse_args()
    result = check(a.file, a.arch, a.min_os)
    if isinstance(result, list):
        problems = result
    else:
        problems, dylibs, minos, signed = result
    if problems:
        for p in problems:
            print(f"check_macho: {a.file}: {p}", file=sys.stderr)
        sys.exit(1)
    print(f"check_macho: {a.file}: {a.arch}, macOS {version(minos)}+, {'signed' if signed else 'unsigned'}, "
          f"loads {', '.join(dylibs)}")


if __name__ == "__main__":
    main()
