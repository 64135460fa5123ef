"""The same program in every language of the contract: it prints TOKEN and its first
argument (ARG, which a shell would split), and writes TOKEN to out.txt."""

from __future__ import annotations

TOKEN = "hello-7f3a"

# Spaces, a dollar and quotes: the argument must reach the program untouched by any shell.
ARG = 'two words $HOME "q"'

HELLO = {
    "py": """
import sys
print("hello-7f3a")
print(sys.argv[1])
open("out.txt", "w").write("hello-7f3a")
""",
    "js": """
const fs = require("fs");
console.log("hello-7f3a");
console.log(process.argv[2]);
fs.writeFileSync("out.txt", "hello-7f3a");
""",
    "ts": """
import { writeFileSync } from "fs";
const token: string = "hello-7f3a";
console.log(token);
console.log(process.argv[2]);
writeFileSync("out.txt", token);
""",
    "c": """
#include <stdio.h>
int main(int argc, char **argv) {
    puts("hello-7f3a");
    puts(argv[1]);
    FILE *f = fopen("out.txt", "w");
    fputs("hello-7f3a", f);
    return fclose(f);
}
""",
    "cpp": """
#include <fstream>
#include <iostream>
int main(int argc, char **argv) {
    std::cout << "hello-7f3a\\n" << argv[1] << "\\n";
    std::ofstream("out.txt") << "hello-7f3a";
}
""",
    # Not named Main, and not the first class: the public one is what runs.
    "java": """
import java.nio.file.*;

class Greeting {
    static String text() { return "hello-7f3a"; }
}

public class Greeter {
    public static void main(String[] args) throws Exception {
        System.out.println(Greeting.text());
        System.out.println(args[0]);
        Files.writeString(Path.of("out.txt"), Greeting.text());
    }
}
""",
    "php": """<?php
echo "hello-7f3a\\n";
echo $argv[1], "\\n";
file_put_contents("out.txt", "hello-7f3a");
""",
    "rs": """
fn main() {
    let arg = std::env::args().nth(1).unwrap();
    println!("hello-7f3a");
    println!("{arg}");
    std::fs::write("out.txt", "hello-7f3a").unwrap();
}
""",
    "go": """
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("hello-7f3a")
	fmt.Println(os.Args[1])
	os.WriteFile("out.txt", []byte("hello-7f3a"), 0o644)
}
""",
    "d": """
import std.file : write;
import std.stdio : writeln;

void main(string[] args) {
    writeln("hello-7f3a");
    writeln(args[1]);
    write("out.txt", "hello-7f3a");
}
""",
    # A module: gfortran writes greeting.mod, which must not land in the working directory.
    "f90": """
module greeting
contains
  subroutine say(text)
    character(len=*), intent(in) :: text
    write (*, '(A)') text
  end subroutine say
end module greeting

program hello
  use greeting
  character(len=100) :: arg
  call get_command_argument(1, arg)
  call say('hello-7f3a')
  call say(trim(arg))
  open (unit=10, file='out.txt', status='replace')
  write (10, '(A)') 'hello-7f3a'
  close (10)
end program hello
""",
    "r": """
args <- commandArgs(trailingOnly = TRUE)
cat("hello-7f3a\\n")
cat(args[1], "\\n", sep = "")
writeLines("hello-7f3a", "out.txt")
""",
    "bash": """
echo hello-7f3a
echo "$1"
echo hello-7f3a > out.txt
""",
}
