// Command carve-release builds carve's release artifacts (make release,
// make release-check) and regenerates the base image's lock file (make
// release-lock). See docs/release.md.
//
//	carve-release build [--full] [flags]   write dist/
//	carve-release check [flags]            build twice, from two copies of the source; compare SHA256SUMS
//	carve-release lock  [--lock PATH]      pin the newest Debian packages of the base
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `carve-release — build carve's release artifacts (docs/release.md)

Usage:
  carve-release build [--full] [flags]  write the release into --dist
  carve-release check [flags]           build twice (the second time from a copy of the
                                        source elsewhere) and compare the SHA256SUMS
  carve-release lock [--source DIR]     pin the newest Debian packages of the image base

Run 'carve-release COMMAND -h' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer) error{
		"build": cmdBuild, "check": cmdCheck, "lock": cmdLock,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "carve-release: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := cmd(ctx, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "carve-release %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
