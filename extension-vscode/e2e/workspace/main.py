import argparse


def main():
