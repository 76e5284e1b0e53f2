"""The repository's root on sys.path (pytest puts a root conftest's folder there), so that perf/ and
tests/ import each other as ``perf.*`` and ``tests.*``. The suite's pytest plugin is the installed
package's (``ampbench.plugin``, entry point ``pytest11``), never loaded from here."""
