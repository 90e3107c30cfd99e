"""What the settings of every genmesh service share: the HTTP limits, the bind address, the log level,
and how flags and environment are read.

A service declares its settings once, as a ``ServiceSettings`` subclass: each field is a flag (its name
in kebab case), an environment variable (``<env_prefix><NAME>``, or its ``validation_alias`` names) and
a default; its description is its ``--help`` line. ``from_cli`` reads them with pydantic-settings' own
CLI source. Precedence: command-line flag > environment variable > default.

Two markers go in a field's ``Annotated`` metadata: ``Flag("--other")`` names its flag otherwise, and
``EnvOnly(...)`` keeps a secret off the command line (where ``ps`` shows it to every local user): its
flag is refused with a message that names the variable to set.
"""

from __future__ import annotations

import sys
from argparse import SUPPRESS, Action, ArgumentParser, Namespace
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Self

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, CliSettingsSource, SettingsConfigDict, SettingsError

from .limits import HttpLimits, TracingLimits

LIMITS_GROUP = "limits (docs/limits.md)"


@dataclass(frozen=True)
class Flag:
    """The field's flag, where it is not ``--<field-name>``."""

    name: str


@dataclass(frozen=True)
class EnvOnly:
    """A secret: read from the environment only; its flag is refused (``alternative``: what else to use)."""

    alternative: str = ""


class ServiceSettings(BaseSettings, HttpLimits, TracingLimits):
    """Settings of a genmesh service (a subclass's docstring is its ``--help`` description)."""

    model_config = SettingsConfigDict(
        extra="ignore",
        populate_by_name=True,
        cli_kebab_case=True,
        cli_implicit_flags=True,  # a bool is --flag / --no-flag
        cli_hide_none_type=True,
        cli_avoid_json=True,
        cli_show_env_vars=True,
    )

    host: str = Field(default="127.0.0.1", description="bind address")
    log_level: str = Field(default="info", description="debug, info, warning, error")

    @classmethod
    def from_cli(cls, argv: Sequence[str] | None = None) -> Self:
        """The settings from ``argv`` (default: the process's), the environment and the defaults.

        A bad flag or value, from either source, ends the process with status 2 and a message naming
        the flag and the variable.
        """
        cli = ServiceCli(cls)
        try:
            source = cli(args=list(sys.argv[1:] if argv is None else argv))
            return cls(_cli_settings_source=source)  # type: ignore[call-arg]  # BaseSettings' own keyword
        except (ValidationError, SettingsError) as exc:
            cli.fail(exc)


class ServiceCli(CliSettingsSource[ArgumentParser]):
    """pydantic-settings' CLI source, each field under its own flag only (its environment aliases are no
    flags), the HTTP limits in a group of their own, and ``EnvOnly`` fields refused."""

    def __init__(self, settings_cls: type[ServiceSettings]) -> None:
        self._fields = settings_cls.model_fields
        self._flags: dict[str, str] = {}
        self._limits: Any = None
        super().__init__(settings_cls, case_sensitive=True, add_argument_method=self._add_flag)

    def _add_flag(self, parser: ArgumentParser, *names: str, **kwargs: Any) -> Action:
        dest = kwargs.get("dest", "")
        field = self._fields.get(dest)
        if field is None:  # --help
            return parser.add_argument(*names, **kwargs)
        flag = next((m.name for m in field.metadata if isinstance(m, Flag)), "--" + dest.replace("_", "-"))
        self._flags[dest] = flag
        refused = next((m for m in field.metadata if isinstance(m, EnvOnly)), None)
        if refused is not None:
            return parser.add_argument(
                flag, dest=dest, nargs="?", default=SUPPRESS, help=SUPPRESS, action=self._refusal(dest, refused)
            )
        if dest in HttpLimits.model_fields or dest in TracingLimits.model_fields:
            if self._limits is None:
                self._limits = parser.add_argument_group(LIMITS_GROUP)
            return self._limits.add_argument(flag, **kwargs)  # type: ignore[no-any-return]
        return parser.add_argument(flag, **kwargs)

    def _refusal(self, dest: str, refused: EnvOnly) -> type[Action]:
        cli = self

        class Refused(Action):
            def __call__(self, parser: ArgumentParser, ns: Namespace, values: Any, option: str | None = None) -> None:
                env = " or ".join(cli.env_var_names.get(dest, ()))
                alternative = f" {refused.alternative}" if refused.alternative else ""
                parser.error(f"{option} is not accepted (ps shows it to every user): set {env}{alternative}")

        return Refused

    def describe(self, name: str) -> str:
        """``--flag (ENV_VAR)`` of a field, for messages."""
        env = " / ".join(self.env_var_names.get(name, ()))
        return f"{self._flags.get(name, name)} ({env})" if env else self._flags.get(name, name)

    def fail(self, exc: ValidationError | SettingsError) -> NoReturn:
        """Exit 2 with a usage error naming each bad setting (and its value, unless a secret)."""
        if isinstance(exc, SettingsError):
            self.root_parser.error(str(exc))
        lines = []
        for error in exc.errors():
            name = _field_name(self._fields, str(error["loc"][0]) if error["loc"] else "")
            secret = name in self._fields and any(isinstance(m, EnvOnly) for m in self._fields[name].metadata)
            got = "" if secret else f" (got {error['input']!r})"
            lines.append(f"{self.describe(name)}: {error['msg']}{got}")
        self.root_parser.error("bad setting: " + "; ".join(lines))


def _field_name(fields: dict[str, FieldInfo], name: str) -> str:
    """The field an error's location names (a field name or one of its aliases)."""
    for field_name, info in fields.items():
        choices = getattr(info.validation_alias, "choices", ())
        if name == field_name or name in choices:
            return field_name
    return name
