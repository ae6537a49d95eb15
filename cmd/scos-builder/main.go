// Command scos-builder turns an ostree/bootc container image — above all the
// CentOS Stream CoreOS node image of an OKD release payload — into CoreOS
// live boot images and a stream JSON describing them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/okd-project/scos-builder/builder"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().Run(ctx, os.Args)
	stop()
	if err != nil {
		// The one place errors are printed and the process exits.
		if builder.IsCanceled(err) {
			fmt.Fprintln(os.Stderr, "error: interrupted")
			os.Exit(130)
		}
		var ec exitCoder
		if errors.As(err, &ec) {
			if msg := err.Error(); msg != "" {
				fmt.Fprintf(os.Stderr, "error: %s\n", msg)
			}
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintf(os.Stderr, "error: %s\n", err)
		os.Exit(1)
	}
}

type exitCoder interface {
	error
	ExitCode() int
}
