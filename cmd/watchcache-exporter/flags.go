package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// config is everything the command line sets.
type config struct {
	kubeconfig    string
	listenAddress string
	telemetryPath string
	webConfigFile string
	logLevel      string
	logFormat     string
	version       bool
}

// errHelp is returned for --help: usage was printed, exit 0.
var errHelp = pflag.ErrHelp

// parseFlags parses and validates args. Its errors name the bad flag.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("watchcache-exporter", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: in-cluster config, then the usual kubeconfig rules ($KUBECONFIG, ~/.kube/config).")
	fs.StringVar(&c.listenAddress, "web.listen-address", ":9890", "Address on which to expose metrics and the status endpoints.")
	fs.StringVar(&c.telemetryPath, "web.telemetry-path", "/metrics", "Path under which to expose metrics.")
	fs.StringVar(&c.webConfigFile, "web.config.file", "", "Path to an exporter-toolkit web configuration file (TLS and basic auth).")
	fs.StringVar(&c.logLevel, "log.level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&c.logFormat, "log.format", "json", "Log format: json or text.")
	fs.BoolVar(&c.version, "version", false, "Print version information and exit.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: this command takes only flags", fs.Arg(0))
	}
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if c.listenAddress == "" {
		errs = append(errs, errors.New("--web.listen-address must not be empty"))
	}
	if !strings.HasPrefix(c.telemetryPath, "/") || c.telemetryPath == "/" {
		errs = append(errs, fmt.Errorf("--web.telemetry-path=%q must start with / and name a path other than /", c.telemetryPath))
	}
	if c.webConfigFile != "" {
		if _, err := os.Stat(c.webConfigFile); err != nil {
			errs = append(errs, fmt.Errorf("--web.config.file: %w", err))
		}
	}
	if c.kubeconfig != "" {
		if _, err := os.Stat(c.kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig: %w", err))
		}
	}
	if _, err := parseLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		errs = append(errs, fmt.Errorf("--log.format=%q: want json or text", c.logFormat))
	}
	return errors.Join(errs...)
}
