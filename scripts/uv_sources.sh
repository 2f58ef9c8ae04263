# Sourced by bootstrap.sh and isolated.sh. uv does not read pip's configuration:
# `uv_sources PYTHON` sets UV_SOURCES to the find-links and extra indexes that PYTHON's pip has
# here (torch's local wheels, package mirrors), as uv options.
uv_sources() {
  local python=$1 link index
  UV_SOURCES=(--index-strategy unsafe-best-match)
  for link in $("$python" -m pip config get global.find-links 2>/dev/null || true); do
    UV_SOURCES+=(--find-links "$link")
  done
  for index in $("$python" -m pip config get global.extra-index-url 2>/dev/null || true); do
    # uv refuses a file:// index that is not there (pip only warns)
    if [[ $index != file://* ]] || [ -d "${index#file://}" ]; then
      UV_SOURCES+=(--extra-index-url "$index")
    fi
  done
}
