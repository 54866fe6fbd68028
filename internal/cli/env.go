package cli

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envAnnotation marks a flag that an environment variable may set; its
// value is the variable's name.
const envAnnotation = "talkide_env"

// EnvName is the variable that sets flag name: TALKIDE_ and the name in
// upper case with '_' for '-'.
func EnvName(name string) string {
	return "TALKIDE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// EnvOf is the variable that sets f, if one may.
func EnvOf(f *pflag.Flag) (string, bool) {
	vs := f.Annotations[envAnnotation]
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// BindEnv lets environment variables set the named flags of fs, and says
// so in their help. Only settings bind: where to find things and how to
// run. Flags that name what a command acts on (an id, a subject, an
// amount) or that make it destructive (--force) never do, so that a
// variable left in a shell cannot change what a command does to data.
func BindEnv(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			panic("BindEnv: no flag --" + n)
		}
		v := EnvName(n)
		f.Usage += " [$" + v + "]"
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{v}
	}
}

// applyEnv sets every bound flag not given on the command line from its
// variable: the command line wins over the environment, which wins over
// the default.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		name, bound := EnvOf(f)
		if err != nil || f.Changed || !bound {
			return
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = Usagef(cmd, "$%s=%q (for --%s): %v", name, v, f.Name, serr)
		}
	})
	return err
}
