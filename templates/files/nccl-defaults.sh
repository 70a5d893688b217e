# Sourced by the entrypoint (Docker) and by %environment (Apptainer); POSIX sh.
# NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, when unset: exclude docker0, lo, veth, virbr and br-
# bridges if another interface exists (NCCL otherwise may bootstrap over docker0 and hang across
# nodes); gloo gets the first such interface whose link is up (operstate "up"; else "unknown",
# which drivers that do not track the link report), never one that is down; use lo when no
# other interface is up, so a single-node job in a container without networking still runs.
# A value the user set is never changed.
if [ -z "${NCCL_SOCKET_IFNAME:-}" ] || [ -z "${GLOO_SOCKET_IFNAME:-}" ]; then
  _eb_first=""
  _eb_unknown=""
  for _eb_path in /sys/class/net/*; do
    [ -e "$_eb_path" ] || continue
    _eb_if=${_eb_path##*/}
    case "$_eb_if" in
      lo|docker*|veth*|virbr*|br-*) ;;
      *)
        _eb_state=$(cat "/sys/class/net/$_eb_if/operstate" 2>/dev/null || echo unknown)
        case "$_eb_state" in
          up) [ -n "$_eb_first" ] || _eb_first="$_eb_if" ;;
          unknown) [ -n "$_eb_unknown" ] || _eb_unknown="$_eb_if" ;;
        esac ;;
    esac
  done
  [ -n "$_eb_first" ] || _eb_first="$_eb_unknown"
  if [ -n "$_eb_first" ]; then
    : "${NCCL_SOCKET_IFNAME:=^docker,lo,veth,virbr,br-}"
    : "${GLOO_SOCKET_IFNAME:=$_eb_first}"
  else
    : "${NCCL_SOCKET_IFNAME:=lo}"
    : "${GLOO_SOCKET_IFNAME:=lo}"
  fi
  export NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
  unset _eb_first _eb_if _eb_unknown _eb_state _eb_path
fi
