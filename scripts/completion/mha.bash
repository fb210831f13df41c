# bash completion for mha: subcommands, then the options of the subcommand at hand, read from
# its own --help so that this file never disagrees with the binary. Installed as
# share/bash-completion/completions/mha; or: source scripts/completion/mha.bash
_mha() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; [[ $cmd == weights ]] && cmd="weights convert"; break ;;
    esac
  done
  if [[ -z $cmd ]]; then
    COMPREPLY=($(compgen -W "run weights compare bench sweep inspect plot view --help --version -v -q" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    local opts
    opts=$(${COMP_WORDS[0]} $cmd --help 2>/dev/null | grep -oE -- '--[a-z_]+' | sort -u)
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _mha mha
