# What zsh offers for a command line, for tests/it/completion.rs:
#
#   zsh -f completion_capture.zsh FPATH_DIR OUT_FILE LINE [PRELUDE_FILE]
#
# starts an interactive `zsh -f` on a pseudo-terminal (zsh/zpty) with compinit loading the
# completion functions of FPATH_DIR (before the system's), sources PRELUDE_FILE there, types
# LINE and a TAB, and writes to OUT_FILE each match that the completion adds, one a line as
# "match<TAB>description", then a line "<done>" once the completion has finished.
#
# The matches are caught by wrapping the `compadd` builtin: each call that adds matches is
# repeated with -O, which stores in an array the matches the call adds (those that fit the word
# on the line) instead of adding them. Calls that only filter arrays (-O, -A, -D) pass through.

if [[ $1 == --setup ]]; then
  # In the interactive zsh.
  PS1= PROMPT= RPROMPT=
  fpath=($2 $fpath)
  autoload -Uz compinit
  compinit -u -D
  zstyle ':completion:*' insert-tab false
  bindkey '^I' complete-word
  typeset -g _capture_out=$3
  [[ -n $4 ]] && source $4

  compadd() {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
      builtin compadd "$@"
      return
    fi
    # What goes on the line before a match: -p (hidden) then -P prefixes, after $IPREFIX
    # (the `--opt=` of `--opt=value`, the `./` of a path).
    local __prefix=$IPREFIX __arg __hidden= __shown=
    integer __i=1
    while (( __i <= $# )); do
      __arg=${@[__i]}
      case $__arg in
        (-|--) break ;;
        (-p) __hidden=${@[__i+1]}; (( __i++ )) ;;
        (-P) __shown=${@[__i+1]}; (( __i++ )) ;;
        (-p?*) __hidden=${__arg#-p} ;;
        (-P?*) __shown=${__arg#-P} ;;
        (-[SsiIWdJVXxrRDOAEMF]) (( __i++ )) ;;
      esac
      (( __i++ ))
    done
    __prefix+=$__hidden$__shown
    local -a __hits __descr
    local __d=${@[(i)-d]}
    if (( __d < $# )); then
      local __dv=${@[__d+1]}
      if [[ $__dv == \(* ]]; then
        eval "__descr=$__dv"
      else
        __descr=("${(@P)__dv}")
      fi
    fi
    builtin compadd -O __hits "$@"
    local __h
    for __h in {1..$#__hits}; do
      print -r -- "$__prefix$__hits[__h]"$'\t'"${__descr[__h]}" >> $_capture_out
    done
    builtin compadd "$@"
  }
  _capture_done() { print -r -- '<done>' >> $_capture_out }
  comppostfuncs=(_capture_done)
  print -r -- '<ready>'
  return
fi

zmodload zsh/zpty || exit 3
local self=${0:A} dir=$1 out=$2 line=$3 prelude=$4 text
zpty capture zsh -f -i
zpty -w capture "source ${(q)self} --setup ${(q)dir} ${(q)out} ${(q)prelude}"
integer i ready=0
# Bounded waits (20 s each) for the shell to be ready, then for the completion to finish.
for i in {1..400}; do
  if zpty -r -t capture text && [[ $text == '<ready>'* ]]; then
    ready=1
    break
  fi
  sleep 0.05
done
if (( ! ready )); then
  print -u2 "the zsh on the pseudo-terminal did not get ready"
  zpty -d capture
  exit 4
fi
zpty -w -n capture "$line"$'\t'
for i in {1..400}; do
  [[ -f $out ]] && grep -qx '<done>' $out && break
  zpty -r -t capture text
  sleep 0.05
done
zpty -d capture
