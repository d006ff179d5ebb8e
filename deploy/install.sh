#!/usr/bin/env bash
# Install rmq-py as systemd services on this host (run as root; safe to run again).
#
#   deploy/install.sh [--release PATH | --venv PATH] [--configs DIR] [--prefix DIR]
#                     [--user NAME] [--destdir DIR] [--tls-address ADDR]... [--no-security]
#
# What it does, in order:
#   1. creates the system user and group (default rmq; no home, no login shell);
#   2. creates PREFIX/venv (default /opt/rmq/venv) and pip-installs the release into it: a wheel,
#      an sdist or a source tree (default: the checkout this script is in). --venv PATH uses an
#      existing environment that already has rmq-py instead (nothing is installed into it);
#   3. creates /etc/rmq (root:rmq 0750) and /var/lib/rmq (rmq:rmq 0750); each daemon's data
#      directory /var/lib/rmq/<instance> is made by systemd (StateDirectory=);
#   4. copies every DIR/*.toml of --configs into /etc/rmq (root:rmq 0640), never overwriting a
#      file that is there: the config of a running node is the operator's;
#   5. makes the cluster's security files in /etc/rmq with deploy/security.sh, never
#      overwriting one that is there: auth.key (the cluster's auth key), tls/ca.crt + ca.key (a
#      self-signed CA) and tls/node.crt + node.key (this host's certificate, for every
#      --tls-address; default: this host's name and addresses). The example configs
#      (deploy/config) turn authentication and TLS on with them. On the second and third host,
#      copy /etc/rmq/auth.key and /etc/rmq/tls/ca.* from the first one before running this.
#      --no-security skips the step;
#   6. installs the units rmq-controller@.service, rmq-broker@.service, rmq.target,
#      rmq-controllers.target and rmq-console.service (the web console, docs/console.md) into
#      /etc/systemd/system, pointing at the environment of step 2,
#      the docs into PREFIX/doc and an rmqctl link into /usr/local/bin;
#   7. runs `systemctl daemon-reload` when systemd is running (never with --destdir).
# It enables and starts nothing: docs/operations.md, "First start", does that.
#
# --destdir DIR stages everything under DIR instead of / (packaging, tests): the user is
# created in DIR/etc/passwd (useradd --prefix), and --venv is required (a venv only works at
# the path it was made at).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_tree="$(dirname "$here")"

release="$source_tree"
venv=""
configs=""
prefix="/opt/rmq"
user="rmq"
destdir=""
security=1
tls_addresses=()

usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --release) release="${2:?--release needs a path}"; shift 2 ;;
        --venv) venv="${2:?--venv needs a path}"; shift 2 ;;
        --configs) configs="${2:?--configs needs a directory}"; shift 2 ;;
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --user) user="${2:?--user needs a name}"; shift 2 ;;
        --destdir) destdir="${2:?--destdir needs a directory}"; shift 2 ;;
        --tls-address) tls_addresses+=(--address "${2:?--tls-address needs an address}"); shift 2 ;;
        --no-security) security=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option $1" ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "run as root (it creates a user, directories and units)"
case "$prefix" in /*) ;; *) die "--prefix must be an absolute path" ;; esac
if [ -n "$destdir" ]; then
    destdir="$(cd "$destdir" && pwd)"
    [ -n "$venv" ] || die "--destdir needs --venv (a virtual environment works only where it was made)"
fi
if [ -n "$configs" ] && ! ls "$configs"/*.toml >/dev/null 2>&1; then
    die "--configs $configs holds no *.toml"
fi

# 1. The service user.
passwd_file="$destdir/etc/passwd"
if grep -q "^$user:" "$passwd_file" 2>/dev/null; then
    echo "user $user exists"
else
    prefix_opt=()
    [ -n "$destdir" ] && prefix_opt=(--prefix "$destdir")
    nologin="$(command -v nologin || echo /usr/sbin/nologin)"
    useradd "${prefix_opt[@]}" --system --user-group --no-create-home \
        --home-dir /var/lib/rmq --shell "$nologin" --comment "rmq-py daemons" "$user"
    echo "created user $user"
fi
uid="$(awk -F: -v u="$user" '$1 == u { print $3 }' "$passwd_file")"
gid="$(awk -F: -v u="$user" '$1 == u { print $4 }' "$passwd_file")"

# 2. The environment.
if [ -n "$venv" ]; then
    venv="$(cd "$venv" && pwd)"
    [ -x "$venv/bin/rmq-broker" ] && [ -x "$venv/bin/rmq-controller" ] \
        || die "--venv $venv has no rmq-broker/rmq-controller (pip install rmq-py into it first)"
    echo "using the environment $venv"
else
    venv="$prefix/venv"
    python="$(command -v python3.11 || command -v python3 || true)"
    [ -n "$python" ] || die "python3 (3.11 or later) is required"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$python is older than 3.11"
    install -d -m 0755 "$prefix"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv" || die "cannot create $venv (on Debian: apt-get install python3-venv)"
    fi
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q --upgrade "$release"
    echo "installed $release into $venv"
fi

# 3. Directories.
install -d -m 0755 "$destdir$prefix" "$destdir$prefix/doc" "$destdir/etc/systemd/system" \
    "$destdir/usr/local/bin"
install -d -m 0750 -o 0 -g "$gid" "$destdir/etc/rmq"
install -d -m 0750 -o "$uid" -g "$gid" "$destdir/var/lib/rmq"

# 4. Configs, never overwritten.
if [ -n "$configs" ]; then
    for file in "$configs"/*.toml; do
        target="$destdir/etc/rmq/$(basename "$file")"
        if [ -e "$target" ]; then
            echo "kept $target (already there)"
        else
            install -m 0640 -o 0 -g "$gid" "$file" "$target"
            echo "installed $target"
        fi
    done
fi

# 5. The auth key, the CA and this host's certificate, never overwritten.
if [ "$security" -eq 1 ]; then
    bash "$here/security.sh" --dir "$destdir/etc/rmq" --owner "$uid:$gid" "${tls_addresses[@]}"
fi

# 6. Units, docs, rmqctl.
for unit in rmq-controller@.service rmq-broker@.service rmq.target rmq-controllers.target \
    rmq-console.service; do
    sed -e "s#/opt/rmq/venv/#$venv/#g" \
        -e "s#/opt/rmq/doc/#$prefix/doc/#g" \
        -e "s#^User=rmq\$#User=$user#" \
        -e "s#^Group=rmq\$#Group=$user#" \
        "$here/systemd/$unit" >"$destdir/etc/systemd/system/$unit"
    chmod 0644 "$destdir/etc/systemd/system/$unit"
done
echo "installed units into $destdir/etc/systemd/system"
# Every page: they link to each other (design.md, protocol.md, ...).
for doc in "$source_tree"/docs/*.md; do
    install -m 0644 "$doc" "$destdir$prefix/doc/$(basename "$doc")"
done
ln -sfn "$venv/bin/rmqctl" "$destdir/usr/local/bin/rmqctl"

# 7. systemd.
if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    echo "systemd reloaded"
fi
cat <<EOF
Done. Next (docs/operations.md, "First start"): edit /etc/rmq/*.toml for this host, then
  systemctl enable rmq.target rmq-controllers.target rmq-controller@<id> rmq-broker@<group>...
  systemctl start rmq.target
and for the web console (docs/console.md): write /etc/rmq/console.toml, then
  systemctl enable --now rmq-console
EOF
