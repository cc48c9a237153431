"""Where the console is and who we are: flags, then the environment, then the config file.

The file is TOML (`url = "…"`, `token = "…"`) at $GPU_CONSOLE_CONFIG, else
$XDG_CONFIG_HOME/gpu-console/config.toml, else ~/.config/gpu-console/config.toml. It holds
a secret, so it is written with mode 0600.
"""

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def config_path() -> Path:
    explicit = os.environ.get("GPU_CONSOLE_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpu-console" / "config.toml"


def _from_file(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return {key: str(value) for key, value in data.items() if key in ("url", "token")}


def load(url: str | None = None, token: str | None = None) -> Config:
    stored = _from_file(config_path())
    url = url or os.environ.get("GPU_CONSOLE_URL") or stored.get("url", "")
    token = token or os.environ.get("GPU_CONSOLE_TOKEN") or stored.get("token", "")
    if not url:
        raise ConfigError(
            "no console URL: set GPU_CONSOLE_URL, pass --url, or run `gpu-console login`"
        )
    if not token:
        raise ConfigError(
            "no API token: set GPU_CONSOLE_TOKEN, pass --token, or run `gpu-console login` "
            "(create a token on the console's API token page)"
        )
    return Config(url.rstrip("/"), token.strip())


def save(config: Config, path: Path | None = None) -> Path:
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # json.dumps of a str is a valid TOML basic string.
    text = f"url = {json.dumps(config.url)}\ntoken = {json.dumps(config.token)}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path
