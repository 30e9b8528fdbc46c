// kfn-htpasswd prints one htpasswd line (bcrypt, what the registry's htpasswd auth reads) for
// the user named by its argument and the password on its standard input.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" {
		fmt.Fprintln(os.Stderr, "usage: kfn-htpasswd <user>  (the password on standard input)")
		os.Exit(2)
	}
	password, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && password == "" {
		fmt.Fprintln(os.Stderr, "kfn-htpasswd: no password on standard input")
		os.Exit(2)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimRight(password, "\r\n")), bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfn-htpasswd:", err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\n", os.Args[1], hash)
}
