"""The ``client`` package's public names, resolved on first use (client/__init__.py, PEP 562):
the table of where each is defined lists exactly ``__all__``, and each name is the object its
module defines, whether asked for by attribute or by ``from client import``."""

from __future__ import annotations

import importlib

import client
from tests.support.procs import python_output


def test_the_lazy_table_lists_every_public_name_where_it_is_defined() -> None:
    assert sorted(client._WHERE) == sorted(client.__all__)
    for name in client.__all__:
        defined = getattr(importlib.import_module(client._WHERE[name]), name)
        assert getattr(client, name) is defined, name


def test_an_unknown_name_is_an_attribute_error_and_a_part_imports_no_other() -> None:
    probe = (
        "import sys, client\n"
        "from client import ClientError\n"
        "try:\n"
        "    client.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
        "print(sorted(m for m in ('client.producer', 'client.consumer') if m in sys.modules))\n"
    )
    printed = python_output(probe)
    assert printed.splitlines() == [
        "module 'client' has no attribute 'NoSuchName'",
        "[]",
    ], printed
