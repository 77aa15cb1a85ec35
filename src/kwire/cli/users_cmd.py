"""``kwire users``: the broker's SASL users, kept in its data directory (no broker needed).

    kwire users add alice --password-stdin < secret.txt     SCRAM-SHA-256 and -512 (PLAIN checks them too)
    kwire users add bob --mechanism SCRAM-SHA-512            asks for the password on the terminal
    kwire users remove alice
    kwire users list --json

Passwords are never stored: only RFC 5802's salted hashes (salt, iterations, StoredKey, ServerKey),
in ``<data dir>/__kwire/credentials.json`` (mode 0600). A running broker picks changes up at the next
login. The data dir is ``--data-dir``, else the one in ``--config`` (the broker's TOML), else
./kwire-data, as for ``kwire broker``.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from kwire.broker.config import ConfigError, load_config
from kwire.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

from .output import fail, print_json, print_table

PASSWORD_ENV = "KWIRE_USER_PASSWORD"


def add_data_dir_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, help="the broker's data directory (default ./kwire-data)")
    p.add_argument("--config", type=Path, metavar="FILE", help="take the data directory from this broker TOML")


def data_dir_of(args: argparse.Namespace) -> Path:
    """--data-dir, else --config's data_dir, else the broker's default."""
    return load_config(args.config, data_dir=args.data_dir).data_dir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="manage the broker's SASL users (offline, in its data dir)",
                       description="Add, remove and list the users kwire's broker accepts on SASL listeners "
                                   "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). Works on the data directory: "
                                   "no broker needed, and a running broker sees changes at the next login.")
    usub = p.add_subparsers(dest="users_command", metavar="SUBCOMMAND")
    usub.required = True

    q = usub.add_parser("add", help="create a user or change its password",
                        description="Create a user or replace its credentials. The password comes from "
                                    f"--password-stdin, ${PASSWORD_ENV}, --password (visible to other local "
                                    "users in the process list: avoid), or a terminal prompt.")
    q.add_argument("username")
    source = q.add_mutually_exclusive_group()
    source.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
    source.add_argument("--password", help="the password (prefer --password-stdin)")
    q.add_argument("--mechanism", dest="mechanisms", action="append", choices=sorted(MECHANISMS),
                   help="SCRAM mechanisms to create credentials for (repeatable; default both). PLAIN logins "
                        "are checked against them")
    q.add_argument("--iterations", type=int, default=MIN_ITERATIONS,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default {MIN_ITERATIONS})")
    add_data_dir_options(q)
    q.set_defaults(func=cmd_add)

    q = usub.add_parser("remove", help="delete users", description="Delete users and their credentials.")
    q.add_argument("usernames", nargs="+", metavar="USERNAME")
    add_data_dir_options(q)
    q.set_defaults(func=cmd_remove)

    q = usub.add_parser("list", help="the users and their mechanisms",
                        description="Every user with the mechanisms it has credentials for (never a password).")
    q.add_argument("--json", action="store_true", help="a JSON document instead of a table")
    add_data_dir_options(q)
    q.set_defaults(func=cmd_list)


def _store(args: argparse.Namespace):
    from kwire.broker.auth.credentials import CredentialStore

    return CredentialStore(data_dir_of(args))


def _password(args: argparse.Namespace) -> str | None:
    if args.password_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    if args.password is not None:
        return args.password
    if os.environ.get(PASSWORD_ENV):
        return os.environ[PASSWORD_ENV]
    if not sys.stdin.isatty():
        return None
    first = getpass.getpass(f"Password for {args.username}: ")
    if getpass.getpass("Again: ") != first:
        raise ValueError("the passwords differ")
    return first


def cmd_add(args: argparse.Namespace) -> int:
    try:
        password = _password(args)
        if not password:
            return fail(f"no password: use --password-stdin, ${PASSWORD_ENV} or a terminal")
        store = _store(args)
        existed = args.username in store.users()
        store.set_password(args.username, password, args.mechanisms or sorted(MECHANISMS),
                           iterations=args.iterations)
    except (ConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
    mechanisms = ", ".join(args.mechanisms or sorted(MECHANISMS))
    print(f"{'updated' if existed else 'added'} user {args.username} ({mechanisms}) in {store.path}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        missing = [u for u in args.usernames if not store.remove(u)]
    except (ConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
    for user in args.usernames:
        if user not in missing:
            print(f"removed user {user}")
    if missing:
        return fail(f"no such user: {', '.join(missing)}", 1)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        users = store.users()
        rows = [{"username": name, "mechanisms": mechanisms, "iterations": store.iterations(name)}
                for name, mechanisms in users.items()]
    except (ConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
    if args.json:
        print_json({"users": rows})
        return 0
    print_table(["USER", "MECHANISMS", "ITERATIONS"],
                [[r["username"], ", ".join(r["mechanisms"]),
                  ", ".join(str(i) for i in sorted(set(r["iterations"].values())))] for r in rows])
    return 0
