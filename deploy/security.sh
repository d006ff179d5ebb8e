#!/usr/bin/env bash
# Make the cluster's security files with the openssl CLI, never overwriting one that exists:
#
#   deploy/security.sh --dir DIR [--owner USER[:GROUP]] [--address ADDR]... [--name NAME]
#
#   DIR/auth.key         the cluster's auth key (32 random bytes, base64), mode 600
#   DIR/tls/ca.crt       a self-signed CA (EC P-256, 10 years), mode 644
#   DIR/tls/ca.key       its key, mode 600 (root): only this host can sign certificates
#   DIR/tls/node.crt     this host's certificate, signed by the CA (825 days), for every
#   DIR/tls/node.key     --address (IP or DNS name; default: this host's name and addresses),
#                        usable as server and client certificate; key mode 600
#
# The auth key and the CA must be the same on every host: run this on the first host, copy
# DIR/auth.key, DIR/tls/ca.crt and DIR/tls/ca.key to the others, then run it there (each host
# gets its own certificate from the copied CA; remove ca.key from the hosts afterwards if
# you keep the CA elsewhere). --owner makes the files the daemons read (auth.key, node.key,
# node.crt) that user's. docs/operations.md, "Security", explains rotating them.
set -euo pipefail

dir=""
owner=""
name=""
addresses=()
die() { echo "security.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir="${2:?--dir needs a directory}"; shift 2 ;;
        --owner) owner="${2:?--owner needs a user}"; shift 2 ;;
        --address) addresses+=("${2:?--address needs an address}"); shift 2 ;;
        --name) name="${2:?--name needs a name}"; shift 2 ;;
        -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1" ;;
    esac
done
[ -n "$dir" ] || die "--dir is required"
command -v openssl >/dev/null || die "the openssl command is required"
if [ ${#addresses[@]} -eq 0 ]; then
    addresses+=("$(hostname -f 2>/dev/null || hostname)")
    for a in $(hostname -I 2>/dev/null || true); do addresses+=("$a"); done
    addresses+=("127.0.0.1")
fi
[ -n "$name" ] || name="${addresses[0]}"

umask 077
install -d -m 0750 "$dir/tls"
own() { [ -z "$owner" ] || chown "$owner" "$@"; }
own "$dir/tls"

if [ -e "$dir/auth.key" ]; then
    echo "kept $dir/auth.key (already there)"
else
    head -c 32 /dev/urandom | base64 >"$dir/auth.key"
    chmod 0600 "$dir/auth.key"
    own "$dir/auth.key"
    echo "made $dir/auth.key"
fi

ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if [ -e "$dir/tls/ca.crt" ]; then
    echo "kept $dir/tls/ca.crt (already there)"
else
    openssl req -x509 "${ec[@]}" -keyout "$dir/tls/ca.key" -out "$dir/tls/ca.crt" \
        -days 3650 -subj "/CN=rmq cluster CA" 2>/dev/null
    chmod 0600 "$dir/tls/ca.key"
    chmod 0644 "$dir/tls/ca.crt"
    echo "made $dir/tls/ca.crt (self-signed CA)"
fi

if [ -e "$dir/tls/node.crt" ]; then
    echo "kept $dir/tls/node.crt (already there)"
else
    [ -e "$dir/tls/ca.key" ] || die "no $dir/tls/ca.key to sign this host's certificate with"
    san=""
    for a in "${addresses[@]}"; do
        if [[ "$a" =~ ^[0-9.]+$ || "$a" == *:* ]]; then san+="IP:$a,"; else san+="DNS:$a,"; fi
    done
    ext="$(mktemp)"
    trap 'rm -f "$ext" "$dir/tls/node.csr"' EXIT
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "${san%,}" >"$ext"
    openssl req "${ec[@]}" -keyout "$dir/tls/node.key" -out "$dir/tls/node.csr" \
        -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$dir/tls/node.csr" -CA "$dir/tls/ca.crt" -CAkey "$dir/tls/ca.key" \
        -CAcreateserial -out "$dir/tls/node.crt" -days 825 -extfile "$ext" 2>/dev/null
    chmod 0600 "$dir/tls/node.key"
    chmod 0644 "$dir/tls/node.crt"
    own "$dir/tls/node.key" "$dir/tls/node.crt"
    echo "made $dir/tls/node.crt for ${addresses[*]}"
fi
