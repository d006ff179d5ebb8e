"""Self-healing storage (issue 31): a CommitLog record that fails its checks on this broker is
fetched from another replica of the group and written back in place.

- :mod:`broker.repair.fetch`: :class:`~broker.repair.fetch.RecordRepair`, the asking side:
  which replicas to ask (in-sync ones first; a slave asks its master first), REPAIR_RECORD to
  each in turn, the answer checked again (``protocol.broker_requests.repair``) before the bytes
  are written over the damaged ones, counted and logged once per record.
- :mod:`broker.repair.answer`: REPAIR_RECORD's processor, the answering side: only bytes of this
  replica that pass their CRC, of the asker's epoch, are sent.
"""
