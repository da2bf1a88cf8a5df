# Helpers the benchmarks share (sourced after scripts/postgres.sh).

free_port() { local p=$1; while port_open "$p"; do p=$((p + 1)); done; echo "$p"; }
peak_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# CPU ticks of every Postgres process (the server is shared; nothing else should be using it),
# and of those that have exited (the server process's reaped children: its own parent is no
# Postgres process), so a connection closed during the window does not take its ticks along.
postgres_ticks() {
  cat /proc/[0-9]*/stat 2>/dev/null | awk '
    $2 == "(postgres)" { pg[$1] = 1; parent[$1] = $4; t += $14 + $15; reaped[$1] = $16 + $17 }
    END { for (p in pg) if (!(parent[p] in pg)) t += reaped[p]; printf "%d\n", t }'
}
# Sum of apiserver_request_total, for reads (get, list, watch) or writes (everything else).
k8s_requests() { # url reads|writes
  curl -fsS "$1/metrics" | awk -v want="$2" '
    /^apiserver_request_total\{/ {
      match($0, /verb="[^"]*"/); verb = substr($0, RSTART + 6, RLENGTH - 7)
      read = (verb == "GET" || verb == "LIST" || verb == "WATCH" || verb == "get" || verb == "list" || verb == "watch")
      if ((want == "reads") == read) sum += $NF
    }
    END { printf "%d\n", sum }'
}

# wrk, the Debian package, installed when missing; and pgbench, which comes with Postgres.
ensure_wrk_and_pgbench() {
  if ! command -v wrk >/dev/null; then
    log "installing wrk (Debian package)"
    local sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_=sudo
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
  fi
  command -v pgbench >/dev/null || die "pgbench is missing (Debian: apt-get install postgresql-client)"
}
